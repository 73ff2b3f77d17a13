"""A fitted system carried out of a run: ``write.export_system`` writes a self-contained folder (its parameters as
safetensors, its backbone, the users' context and the shots its unseen users were adapted from), and
``model.load_rm`` reads it back as an :class:`~perbench.export.model.ExportedRM` that scores, adapts to a new user
and serves as a TRL ``reward_funcs`` callable. The folder's layout is in docs/export.md."""
