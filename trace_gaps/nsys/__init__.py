"""Everything that knows the Nsight Systems export format."""
