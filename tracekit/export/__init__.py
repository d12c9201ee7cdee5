"""Writers that turn loaded traces into files for other tools (Perfetto's UI)."""
