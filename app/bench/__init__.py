"""``vidpipe bench`` and ``vidpipe profile``: side-by-side speed measurements and the bottleneck."""
