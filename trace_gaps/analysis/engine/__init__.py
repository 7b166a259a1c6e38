"""The engine: the analyses run over windows of steps, their metrics merged."""
