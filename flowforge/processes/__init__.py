"""The long-running processes: scheduler, publisher and worker, and their shared loop."""
