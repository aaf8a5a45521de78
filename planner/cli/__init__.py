"""The command line: one module per command group (typer), the flags derived from the option
declarations, the one error path and the helpers the commands share."""
