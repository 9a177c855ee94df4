"""agentworkers: run AI agent workers as pods and govern their virtual-agent profiles."""

__version__ = "0.1.0"
