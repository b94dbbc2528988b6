"""A0_PreProcessing's parts; the stage itself is ``ragstream/stages/a0_preprocessing.py``."""
