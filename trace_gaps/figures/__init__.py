"""The per-stage figures, each declared once: what they are computed from (inputs), how a
figure is declared (declaration), the stage's figures (stage) and its GPU metrics' (gpu),
and the step's speed of light."""
