"""The application service: the only way to change FlowForge's state."""
