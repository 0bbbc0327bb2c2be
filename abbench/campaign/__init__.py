"""The campaign: the runner that drives every stage, until-ci, resume, calibrate."""
