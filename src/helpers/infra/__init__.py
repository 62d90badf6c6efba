"""The chapter's shared infrastructure, apart from its ideas.

Loading the model, measuring, claims, messages, controls, plotting, the chapter's numbers and the corpus:
every notebook uses these, so a change here means a review of every notebook (AUTHORING.md).
"""
