"""Who may connect: salted user credentials (SCRAM, RFC 5802/7677) and TLS contexts.

Core code with no storage or handler imports: the listeners check credentials through the
`UserDirectory` port (credentials.py), which app.py fills from the users store.
"""
