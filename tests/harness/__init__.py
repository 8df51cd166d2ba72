"""Test harnesses that bring up real services (the Docker engine, sshd) for integration tests."""
