"""The parse job's parts, each testable without Ray: its config, the read and parse stages, the driver's reuse
ordering and console output; ``ray_data`` wires them into Ray Data. The command is ``pipelines/parse_replays.py``."""
