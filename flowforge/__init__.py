"""FlowForge: an event-sourced workflow engine."""
