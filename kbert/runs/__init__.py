"""The runs behind kbert's commands: fine-tuning, compression and the demo, each writing a run folder.

`kbert.cli` parses a command's flags and calls one of these; a program may
call them too. `outputs` says what a command may write or replace, checked
before any work starts.
"""
