"""Example TensorFlow trainer (user code): digits classifier, Vertex-AI-style env contract."""
