"""Features whose interfaces follow verl's ``verl.experimental`` package (the agent loop)."""
