"""The jail: standard-library code that runs inside the sandbox and around each contained server."""
