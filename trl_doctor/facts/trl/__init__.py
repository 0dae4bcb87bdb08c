"""Facts about the installed TRL and the packages beside it: what TRL provides and does (`installed`: its classes,
its trainers' source and every reading of it), how its trainer generates (`generation`), its batch arithmetic read
with `ast` (`geometry`), what its parser makes of a config's values (`parsing`) and the config object it builds
(`trainer_config`), each release's config fields shipped as data for `--static` (`fields`), and the declared
requirements and known issues between the installed ML packages (`versions`)."""
