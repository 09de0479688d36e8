# The two commands a newcomer needs (README.md):
#   make lab    set up this machine, bring the local lab up, run site.yml on it
#   make test   set up this machine and run every test (what CI runs)
SHELL := /bin/bash

.PHONY: bootstrap lab lab-down lab-status test lint sanity unit integration lab-tests other-tests release bench

bootstrap:
	bash scripts/bootstrap.sh

lab: bootstrap
	bash scripts/lab-main.sh

lab-down:
	source scripts/env.sh && lab/labctl down

lab-status:
	source scripts/env.sh && lab/labctl status

test: bootstrap
	bash scripts/test.sh

# Single stages, for a quicker loop once `make bootstrap` has run.
lint sanity unit integration lab-tests other-tests release:
	bash scripts/test.sh $@

bench: bootstrap
	bash scripts/bench.sh
