# The binary itself: version and an unknown subcommand.
expect(version 0 "iser 0.1.0" --version)
expect(unknown_subcommand nonzero "" no-such-command)
