"""One module per registered output (reporting.registry): `build(job)` returns a figure or a `render.Table`."""
