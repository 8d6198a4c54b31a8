"""The message kinds, one module per family, with the records and enums they carry.

``actorwire.messages`` re-exports the user kinds, ``actorwire.messages.runtime`` the
node-protocol kinds and ``actorwire.messages.reserved`` the kinds nothing sends yet;
import them from there, not from here.
"""
