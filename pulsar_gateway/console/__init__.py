"""The web console (issue 37): pages an operator opens first, served on the management
port at `/` behind its login (docs/console.md).

`routes.py` serves the static files (`static/`: one HTML page, its scripts and one style
sheet, nothing fetched from elsewhere) and the JSON the pages read; `kafka_view.py` reads
topics, messages and groups through the Kafka storage port and the group coordinators;
`amqp_view.py` answers the AMQP actions; `migrations_view.py` reads what `migrate` and
`parity` leave in the data directory. AMQP listings and the cluster view are the
management API's own `/api/` and `/cluster`, which the script reads directly. Every answer
is filtered by the caller's rights, as the Kafka and AMQP listeners filter theirs.
"""
