"""cordstream shell: the async layer over discord.py (built in the shell issue)."""
