"""The pieces of ``dejacache demo``: an agent loop, a scripted travel model and its tools,
and the printer. Kept apart so the model can be swapped (a real SDK client through HTTP
interception) without touching the loop or the report."""
