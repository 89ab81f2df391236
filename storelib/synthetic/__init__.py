"""Stores written on purpose for the demo, tests and the bench: the generator and the incidents done to a copy."""
