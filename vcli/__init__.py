"""vcli: the Vertex AI training experience (custom jobs, hp-tuning jobs) on machines you own."""

__version__ = "0.1.0"
