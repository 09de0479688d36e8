# The two commands a newcomer needs (README.md):
#   make lab    set up this machine, bring the local lab up, run site.yml on it
#   make test   set up this machine and run every test (what CI runs)
# And for maintainers: make release VERSION=x.y.z (docs/RELEASING.md), make ee,
# make docs (the docs site, offline, into build/docs/build/html).
SHELL := /bin/bash

.PHONY: bootstrap lab lab-down lab-status test lint sanity unit oldest-core integration lab-tests other-tests fleet-tests second-lab-tests release-check release ee bench docs

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
lint sanity unit oldest-core integration lab-tests other-tests fleet-tests second-lab-tests:
	bash scripts/test.sh $@

# The test command's release stage alone (tarball built, installed, run by FQCN).
release-check:
	bash scripts/test.sh release

# Cut a release: make release VERSION=x.y.z [RELEASE_SKIP_TESTS=1]
release: bootstrap
	RELEASE_SKIP_TESTS="$(RELEASE_SKIP_TESTS)" RELEASE_TEST_COMMAND="$(RELEASE_TEST_COMMAND)" \
	  bash scripts/release.sh "$(VERSION)"

# The execution environment image (execution-environment.yml).
ee: bootstrap
	bash scripts/ee.sh build

bench: bootstrap
	bash scripts/bench.sh

# The collection's docs site (antsibull-docs + Sphinx, offline): build/docs/build/html.
docs: bootstrap
	bash scripts/docs.sh
