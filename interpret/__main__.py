"""`python -m interpret ...` runs the CLI, for environments where the console script is not on PATH."""

from interpret.cli.main import main

if __name__ == "__main__":
    main()
