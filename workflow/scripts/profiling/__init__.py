"""Profiler plumbing: ncu/nsys/torch.profiler commands, parsers, kernel classes and one tidy kernel table."""
