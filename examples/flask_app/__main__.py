import tempfile
from pathlib import Path

from examples.flask_app import create_app, db, detector
from sentinel.orm import attach

with tempfile.TemporaryDirectory() as tmp:
    app = create_app(f"sqlite:///{Path(tmp) / 'bank.db'}")
    with attach(db.session, detector=detector, context=app.app_context) as attachment:
        client = app.test_client()
        account = client.post("/accounts").json["id"]
        client.post(f"/accounts/{account}/deposit/50")
        client.post(f"/accounts/{account}/deposit/20")
        attachment.wait_detached(60)
        for text in client.get(f"/accounts/{account}/receipts").json:
            print(text)
