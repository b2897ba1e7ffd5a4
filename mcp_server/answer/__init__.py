"""The answer path, one module a step, in the order a call meets them: door.py (the tools and the Call
their arguments make), question.py (the answering service: the question, its budget and vote),
samples.py (its samples run, and the answer an episode makes), asking.py and choice_form.py (asking
the person), verified.py (the verified library), output.py, answer_text.py and sizing.py (the
answer's shape, text and size), tool_errors.py, audit.py (what a call leaves behind) and view.py
(what each client sees)."""
