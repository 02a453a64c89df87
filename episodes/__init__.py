"""Running many episodes, storing them, reporting on them."""
