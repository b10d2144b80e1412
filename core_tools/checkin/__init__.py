"""Check-ins that cost nothing until something is due (issue 34): rules.py decides, service.py acts."""
