"""The replay: a step replayed from its calls, ops and streams, and the what-ifs it prices."""
