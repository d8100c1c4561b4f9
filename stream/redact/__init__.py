"""What leaves for a judge, with personal data and secrets masked (issue 47): the detectors and
the redactor that replaces what they find with typed, numbered placeholders."""
