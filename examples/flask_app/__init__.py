"""A Flask-SQLAlchemy application whose detached rule runs in the application's
context (``docs/operations.md``, "Flask and other application contexts").

Run with ``python -m examples.flask_app``: it deposits through the web
interface and prints the receipts the detached rule wrote.
"""

from examples.flask_app.app import Account, Receipt, create_app, db, detector, write_receipt

__all__ = ["Account", "Receipt", "create_app", "db", "detector", "write_receipt"]
