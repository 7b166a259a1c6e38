"""`trace-gaps mcp`: the commands as tools of a Model Context Protocol server."""
