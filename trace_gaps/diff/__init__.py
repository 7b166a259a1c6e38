"""The diff: two sides analysed, their change told apart from noise and the machine's drift."""
