"""``python -m tailscope.targets.llm``: run the LLM reference server (see ``--help``)."""

from __future__ import annotations

from tailscope.targets.llm.command import main

if __name__ == "__main__":
    main()
