"""Admission: the checks (`admission`), the webhook server that answers them, its TLS."""
