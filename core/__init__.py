"""Low-level helpers every part of gpu-fleet may use: no Django models, no imports from the apps."""
