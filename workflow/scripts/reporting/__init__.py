"""Analysis of the measurements: result collection, tables, figures and the manifest of paper outputs."""
