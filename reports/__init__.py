"""Report rendering: Jinja2 templates (HTML, LaTeX) and figures over tidy frames; computes no statistics."""
