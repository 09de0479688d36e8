"""STAND-IN (lab only): programs of the stand-in fork images. See ../README.md."""
