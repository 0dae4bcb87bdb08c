"""Checking what a launch command's trainer really gets: the command (`command`), the hooks its script runs
under in the worker (`hooks`), running it until it builds its trainer (`run`), what it built as the check's
config and live objects (`to_config`), and results pointed at what the user can change (`report`)."""
