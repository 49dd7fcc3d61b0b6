"""Kinematics-GS: the blurry-video testbed, the reproduction ``kinematics-gs-blur`` and the renderer benchmark."""
