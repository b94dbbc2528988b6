"""A5_Format_Enforcer's parts; the stage itself is ``ragstream/stages/a5_format_enforcer.py``."""
