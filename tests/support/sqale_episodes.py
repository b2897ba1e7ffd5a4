"""The authors' three published episodes as test fixtures: their calls, and databases to replay them.

`../shared/data/sqale_episodes/episodes.json` (read in place) holds three real M_SQaLe
episodes with the trained environment's own tool outputs. The databases are built here from
what the episodes show: every table name of the schema, the CREATE TABLE statements the model
read (written out multi-line, as SQL files are, so that describe_table's normalisation is
exercised), and rows that reproduce the outputs. Used by tests/tools/test_trained_episodes.py and
bench/bench_environment.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.sqlite import create_database
from tests.support.policies import ScriptPolicy, assistant_reply, tool_call

# ../shared beside the checkout; SQALE_SHARED_DIR names it for a checkout elsewhere (a worktree).
SHARED = Path(os.environ.get("SQALE_SHARED_DIR") or Path(__file__).resolve().parents[2].parent / "shared")
EPISODES_PATH = SHARED / "data" / "sqale_episodes" / "episodes.json"
CLIP = "…"  # the site clipped long lines to their first 101 characters plus this mark


def load_episodes() -> list[dict[str, Any]] | None:
    """The episodes array, or None when ../shared is absent."""
    if not EPISODES_PATH.exists():
        return None
    return json.loads(EPISODES_PATH.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class EpisodeCall:
    """One call of a round, expanded from the site's collapsed (call, n) entries."""

    tool: str
    args: dict[str, Any]
    out: str | None  # the environment's output as the site shows it; None when not shown


def tool_args(tool: str, raw: str) -> dict[str, Any]:
    """The site's argument text (`"AlertLogs", 10` or raw SQL) as a tool's JSON arguments."""
    if tool in ("run_query", "submit_sql"):
        return {"sql": raw}
    values = json.loads(f"[{raw}]") if raw else []
    names = {"describe_table": ("table_name",), "sample_rows": ("table_name", "limit"), "list_tables": ()}[tool]
    return dict(zip(names, values, strict=True))


def round_calls(round_: dict[str, Any]) -> list[EpisodeCall]:
    """The round's calls in order, identical calls repeated n times in a row (as the model made them)."""
    return [
        EpisodeCall(c["tool"], tool_args(c["tool"], c["args"]), c.get("out"))
        for c in round_["calls"]
        for _ in range(c["n"])
    ]


def replay_policy(episode: dict[str, Any]) -> ScriptPolicy:
    """A scripted model making the episode's calls round by round (and its final text answer)."""
    turns: list[str] = []
    final = None
    for round_ in episode["rounds"]:
        if round_["forced"]:
            final = assistant_reply(round_["think"], round_["calls"][0]["args"])
            continue
        calls = [tool_call(c.tool, **c.args) for c in round_calls(round_)]
        turns.append(assistant_reply(round_["think"], *calls))
    return ScriptPolicy(turns, final=final)


def build_database(episode: dict[str, Any], directory: Path) -> Path:
    """A database with every table of the episode's schema and the rows its outputs show."""
    detailed, rows = _SCRIPTS[episode["id"]]
    described = {line.split()[2] for line in detailed.split(";") if "CREATE TABLE" in line}
    others = [
        f'CREATE TABLE "{name}" (id INTEGER PRIMARY KEY, label TEXT);'
        for name in episode["tables"]
        if name not in described
    ]
    script = detailed + "\n" + "\n".join(others) + "\n" + rows
    return create_database(directory / f"{episode['id']}.sqlite", script)


# --- q_0114515 "Alert share": sqlite_master starts with these five tables ----------------------

_ALERTS_TABLES = """
CREATE TABLE rectra (
       id INTEGER PRIMARY KEY NOT NULL,
       status TEXT
);
CREATE TABLE constraint_sets (
    id INTEGER PRIMARY KEY NOT NULL,
    name TEXT
);
CREATE TABLE filter_criteria (
    id INTEGER PRIMARY KEY NOT NULL,
    criteria TEXT
);
CREATE TABLE useractivitylog (
       id INTEGER PRIMARY KEY NOT NULL,
       activity TEXT
);
CREATE TABLE systemlogs (
    id INTEGER PRIMARY KEY NOT NULL,
    logMessage TEXT,
    severityLevel INTEGER,
    timestamp DATETIME
);
CREATE TABLE AlertLogs (
    id INTEGER PRIMARY KEY NOT NULL,
    alertId INTEGER,
    userId INTEGER,
    triggeredAt DATETIME,
    FOREIGN KEY (alertId) REFERENCES aler(id),
    FOREIGN KEY (userId) REFERENCES users(id)
);
CREATE TABLE users (
    id INTEGER PRIMARY KEY NOT NULL,
    username TEXT,
    email TEXT,
    created_at DATETIME
);
"""
# 216 alert log entries, 26 of them by user 5 (rows 2 and 4, and 24 of rows 7..216).
_ALERTS_ROWS = """
INSERT INTO AlertLogs VALUES (1, 1, 6, NULL), (2, 4, 5, '2022-12-13 17:48:56'), (3, 2, 30, NULL),
    (4, 2, 5, '2021-12-23 05:37:09'), (5, 1, 3, '2021-12-15 23:51:42'), (6, 10, 7, NULL);
WITH RECURSIVE n(i) AS (SELECT 7 UNION ALL SELECT i + 1 FROM n WHERE i < 216)
INSERT INTO AlertLogs SELECT i, i % 10 + 1, CASE WHEN i < 31 THEN 5 ELSE 6 + i % 25 END,
    CASE WHEN i % 3 = 0 THEN NULL ELSE printf('2022-%02d-%02d 10:00:00', i % 12 + 1, i % 28 + 1) END
    FROM n;
INSERT INTO users VALUES (1, NULL, 'fenton_sta001@ecommplatform.io', '2021-01-05 19:32:35'),
    (2, NULL, NULL, '2021-12-11 06:42:40'),
    (3, 'edler_eggi003', 'edler_eggi003@gmail.com', '2021-05-11 16:20:13'),
    (4, NULL, 'flack_flav004@hotmail.com', '2020-05-13 11:48:15'),
    (5, NULL, NULL, '2021-01-15 02:46:34'), (6, 'user006', NULL, '2021-02-01 00:00:00');
"""

# --- q_0063694 "Shipping rates" -----------------------------------------------------------------

_SHIPPING_TABLES = """
CREATE TABLE shipping_method_zones (
  id Varchar NOT NULL PRIMARY KEY,
  method_id Varchar NOT NULL,
  region Varchar NOT NULL,
  base_cost Decimal(10,2) NOT NULL,
  additional_cost Decimal(10,2) NOT NULL,
  created_at Datetime NOT NULL,
  updated_at Datetime NOT NULL
);
CREATE TABLE shipping_methods (
  id Varchar NOT NULL PRIMARY KEY,
  name Varchar NOT NULL,
  description Text,
  base_cost Decimal(10,2) NOT NULL,
  estimated_days Integer,
  created_at Datetime NOT NULL,
  updated_at Datetime NOT NULL
);
CREATE TABLE shipping_rate_calculations (
  id Varchar NOT NULL PRIMARY KEY,
  shipping_method_id Varchar NOT NULL,
  weight Decimal(10,2) NOT NULL,
  base_rate Decimal(10,2) NOT NULL,
  final_rate Decimal(10,2) NOT NULL,
  calculated_at Datetime NOT NULL
);
CREATE TABLE shipping_rate_exceptions (
  id Varchar NOT NULL PRIMARY KEY,
  shipping_method_id Varchar NOT NULL,
  exception_region Varchar NOT NULL,
  additional_cost Decimal(10,2) NOT NULL
);
"""
_SHIPPING_ROWS = """
INSERT INTO shipping_methods VALUES
  ('SHM-1000', 'Standard Ground',
   'Reliable Standard Ground service for domestic shipments within the United States.',
   5.99, 5, '2021-01-01 00:00:00', '2021-01-01 00:00:00'),
  ('SHM-1001', 'Express Air',
   'Fast-track Express Air handling optimized for lightweight packages under 5 lbs.',
   14.5, 2, '2021-01-01 00:00:00', '2021-01-01 00:00:00'),
  ('SHM-1002', 'Overnight Priority',
   'Overnight Priority provides door-to-door delivery with customs clearance.',
   29.0, 1, '2021-01-01 00:00:00', '2021-01-01 00:00:00'),
  ('SHM-1003', 'Economy Saver',
   'Economical Economy Saver option suitable for non-urgent bulk items. Estimated 7-10 days.',
   3.25, 9, '2021-01-01 00:00:00', '2021-01-01 00:00:00'),
  ('SHM-1004', 'International Standard',
   'Premium International Standard service ensuring priority handling worldwide.',
   24.0, 12, '2021-01-01 00:00:00', '2021-01-01 00:00:00'),
  ('SHM-1005', 'Freight',
   'Pallet freight.',
   99.0, 14, '2021-01-01 00:00:00', '2021-01-01 00:00:00');
INSERT INTO shipping_rate_calculations VALUES
  ('SRC-000001', 'STANDARD_GROUND', 41.46, 22.19, 23.16, '2021-02-07 05:19:05'),
  ('SRC-000002', 'EXPRESS_2DAY', 38.57, 20.90, 32.57, '2021-03-06 23:43:20'),
  ('SRC-000003', 'OVERNIGHT_AIR', 39.26, 20.60, 49.68, '2021-04-02 08:18:09'),
  ('SRC-000004', 'ECONOMY_MAIL', 14.27, 10.89, 8.49, '2021-05-03 02:34:58'),
  ('SRC-000005', 'PRIORITY_INTL', 48.64, 23.90, 71.51, '2021-06-01 00:14:11'),
  ('SRC-000006', 'PRIORITY_INTL', 12.5, 9.10, 30.02, '2021-07-01 12:00:00');
"""

# --- q_0086702 "Firmware devices": sqlite_master starts with three tables and their indexes -----

_DEVICES_TABLES = """
CREATE TABLE user_notification_bounces (
  uuid TEXT NOT NULL UNIQUE,
  bounced_at TIMESTAMP NOT NULL
);
CREATE TABLE security_audit_logs (
  uuid TEXT NOT NULL UNIQUE,
  event TEXT NOT NULL
);
CREATE TABLE device_firmware (
  uuid TEXT NOT NULL UNIQUE,
  version TEXT NOT NULL
);
CREATE TABLE devices (
  uuid TEXT NOT NULL UNIQUE,
  created Timestamp NOT NULL,
  name Varchar NOT NULL,
  account TEXT NOT NULL
);
CREATE TABLE device_software_dependencies (
  uuid TEXT NOT NULL UNIQUE,
  device_id TEXT NOT NULL,
  dependency_name TEXT NOT NULL,
  version_required TEXT NOT NULL,
  FOREIGN KEY (device_id) REFERENCES devices(uuid)
);
CREATE TABLE device_software_diagnostics (
  uuid TEXT NOT NULL UNIQUE,
  device_id TEXT NOT NULL,
  diagnostic_time TIMESTAMP NOT NULL,
  report_json TEXT NOT NULL,
  FOREIGN KEY (device_id) REFERENCES devices(uuid)
);
CREATE TABLE diagnostic_request_logs (
  log_uuid TEXT NOT NULL UNIQUE,
  device_id TEXT NOT NULL,
  request_time TIMESTAMP NOT NULL,
  report_data TEXT,
  response_time TIMESTAMP,
  FOREIGN KEY (device_id) REFERENCES devices(uuid)
);
"""
_DEVICES_ROWS = """
INSERT INTO devices VALUES
  ('b8c67992-4895-1de8-b2aa2-5361e6c5fe8a4823', '2023-11-17 20:18:58',
   'Hub-Factory Floor-774', 'initech_llc_1187'),
  ('373963ee-6d0b-3c1d-831d6-1f94549a900c5a5d', '2020-01-18 21:14:20',
   'Node-Lab-579', 'wayne_ind_4943'),
  ('54c06cc5-43dc-3ae5-93bff-706672b502b2b5fb', '2020-02-18 15:16:07',
   'Hub-Warehouse-968', 'cyberdyne_9144'),
  ('7c381c1f-4541-16fa-9314f-19c6efd88d102865', '2020-03-01 04:38:21',
   'Actuator-Factory Floor-559', 'cyberdyne_2231'),
  ('489782a1-0ed4-0a5d-87a4-80ff08a37bd9df49', '2022-05-06 21:42:36',
   'Gateway-Warehouse-345', 'soyuz_net_5937'),
  ('d1000000-0000-0000-00000-000000000776', '2021-01-01 00:00:00',
   'Sensor-Remote Site-776', 'acme_0776'),
  ('d2000000-0000-0000-00000-000000000742', '2021-01-01 00:00:00',
   'Gateway-Remote Site-742', 'acme_0742'),
  ('d3000000-0000-0000-00000-000000000964', '2021-01-01 00:00:00',
   'Node-Lab-964', 'acme_0964'),
  ('d4000000-0000-0000-00000-000000000252', '2021-01-01 00:00:00',
   'Hub-Lab-252', 'acme_0252'),
  ('a1000000-0000-0000-00000-000000000489', '2021-01-01 00:00:00',
   'Actuator-Data Center-489', 'acme_0489'),
  ('a2000000-0000-0000-00000-000000000244', '2021-01-01 00:00:00',
   'Actuator-Factory Floor-244', 'acme_0244'),
  ('a3000000-0000-0000-00000-000000000553', '2021-01-01 00:00:00',
   'Actuator-Factory Floor-553', 'acme_0553'),
  ('a4000000-0000-0000-00000-000000000443', '2021-01-01 00:00:00',
   'Actuator-Lab-443', 'acme_0443'),
  ('a5000000-0000-0000-00000-000000000669', '2021-01-01 00:00:00',
   'Actuator-Remote Site-669', 'acme_0669');
INSERT INTO device_software_dependencies VALUES
  ('727245-797321-532833', '88767e26-d74c-2c46-83bd4-7dc85d08e8e747dd',
   'security-patch-agent', '1.6.15-stable'),
  ('741609-154285-527889', 'bc63cfe7-5595-151e-b1ddd-c3f7062b2379681a',
   'sensor-fusion-lib', '5.20.44'),
  ('313520-205732-687693', '0d299234-9010-46dc-b16ea-f29d1d629f6464a4',
   'bluetooth-stack', '5.17.49-stable'),
  ('572211-400174-142220', '7a67a3a8-1895-28ff-b20d9-f7cfe23c2be895c2',
   'wifi-driver', '2.12.37-stable'),
  ('254665-740008-451451', 'cb7015e6-4f7c-3aa0-9914-b66095585301b003',
   'power-management-daemon', '2.0.36-beta'),
  ('492943-414174-444599', '57cb0af4-7455-16c6-b3241-dfb3e6fb23f247a3',
   'sensor-fusion-lib', '3.19.13-beta'),
  ('900001-000000-000776', 'd1000000-0000-0000-00000-000000000776',
   'firmware-updater', '1.0.0'),
  ('900002-000000-000742', 'd2000000-0000-0000-00000-000000000742',
   'firmware-updater', '1.0.0'),
  ('900003-000000-000964', 'd3000000-0000-0000-00000-000000000964',
   'firmware-updater', '1.0.0'),
  ('900004-000000-000252', 'd4000000-0000-0000-00000-000000000252',
   'firmware-updater', '1.0.0'),
  ('900005-000000-000000', 'a1000000-0000-0000-00000-000000000489',
   'wifi-driver', '2.0.0');
INSERT INTO diagnostic_request_logs (log_uuid, device_id, request_time) VALUES
  ('6c985f0f-ed19-4f8f-b5bb-1a880bd2cc73', 'df87a79c-67ec-2b5e-92322-95da753417439aac', '2022-03-26 07:24:13'),
  ('bfd64cb4-3af6-48fd-a9ed-dba33a295917', 'e46ded5c-811c-47da-a27aa-7070e6fa6e77643a', '2022-03-08 04:25:01'),
  ('27dc487a-0ce5-4a7d-81f5-d4341ceddc61', 'fff6ba1d-5374-1f4a-92729-147af89ccfb8f9d', '2023-02-10 22:51:45'),
  ('aca6a8ba-1903-4a09-8de0-80c3d97ccbcb', 'bc63cfe7-5595-151e-b1ddd-c3f7062b2379681a', '2023-10-19 05:35:42'),
  ('ae2ad59e-6981-4ff1-998e-697c8f64a97d', 'c8a8b354-f2ff-3151-825a6-d687617839f9e0fd', '2023-05-04 04:32:07'),
  ('2872071c-0ca7-4776-bb6a-8133ef49329b', '076ecac8-9e7d-4b4d-91816-3a46e9ca8e591199', '2021-06-03 09:36:05'),
  ('30000001-0000-0000-0000-000000000001', '01435f27-458e-11e4-83be2-b63fa1283a058419', '2021-01-01 00:00:00'),
  ('30000002-0000-0000-0000-000000000002', '0848eae1-8c76-30aa-a392e-4fa8999364c51538', '2021-01-01 00:00:00'),
  ('30000003-0000-0000-0000-000000000003', '0d299234-9010-46dc-b16ea-f29d1d629f6464a4', '2021-01-01 00:00:00'),
  ('30000004-0000-0000-0000-000000000004', '102e9502-7483-0674-903c-f893f0985ab851ec', '2021-01-01 00:00:00'),
  ('30000005-0000-0000-0000-000000000005', 'a1000000-0000-0000-00000-000000000489', '2021-01-01 00:00:00'),
  ('30000006-0000-0000-0000-000000000006', 'a2000000-0000-0000-00000-000000000244', '2021-01-01 00:00:00'),
  ('30000007-0000-0000-0000-000000000007', 'a3000000-0000-0000-00000-000000000553', '2021-01-01 00:00:00'),
  ('30000008-0000-0000-0000-000000000008', 'a3000000-0000-0000-00000-000000000553', '2021-01-02 00:00:00'),
  ('30000009-0000-0000-0000-000000000009', 'a4000000-0000-0000-00000-000000000443', '2021-01-01 00:00:00'),
  ('30000010-0000-0000-0000-000000000010', 'a5000000-0000-0000-00000-000000000669', '2021-01-01 00:00:00'),
  ('30000011-0000-0000-0000-000000000011', 'd2000000-0000-0000-00000-000000000742', '2021-01-01 00:00:00'),
  ('30000012-0000-0000-0000-000000000012', 'd2000000-0000-0000-00000-000000000742', '2021-01-02 00:00:00'),
  ('30000013-0000-0000-0000-000000000013', 'd4000000-0000-0000-00000-000000000252', '2021-01-01 00:00:00');
"""

_SCRIPTS = {
    "q_0114515": (_ALERTS_TABLES, _ALERTS_ROWS),
    "q_0063694": (_SHIPPING_TABLES, _SHIPPING_ROWS),
    "q_0086702": (_DEVICES_TABLES, _DEVICES_ROWS),
}
