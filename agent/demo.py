"""The demo database served by `--demo`: a tiny bookshop the project builds itself.

The file is built once into a cache folder (by agent.sqlite.create_database, atomically)
and reused while DEMO_VERSION stays the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .sqlite import create_database

DEMO_ALIAS = "bookshop"
DEMO_VERSION = 1

DEMO_SQL = """
CREATE TABLE authors (
    author_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    country TEXT,
    born INTEGER
);
CREATE TABLE books (
    book_id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    author_id INTEGER NOT NULL REFERENCES authors(author_id),
    genre TEXT NOT NULL,
    published INTEGER,
    price REAL NOT NULL
);
CREATE TABLE customers (
    customer_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    city TEXT NOT NULL,
    joined TEXT NOT NULL
);
CREATE TABLE orders (
    order_id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
    ordered_on TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('shipped', 'pending', 'cancelled'))
);
CREATE TABLE order_items (
    order_id INTEGER NOT NULL REFERENCES orders(order_id),
    book_id INTEGER NOT NULL REFERENCES books(book_id),
    quantity INTEGER NOT NULL,
    unit_price REAL NOT NULL,
    PRIMARY KEY (order_id, book_id)
);
INSERT INTO authors VALUES
 (1, 'Ursula K. Le Guin', 'United States', 1929),
 (2, 'Chinua Achebe', 'Nigeria', 1930),
 (3, 'Italo Calvino', 'Italy', 1923),
 (4, 'Toni Morrison', 'United States', 1931),
 (5, 'Haruki Murakami', 'Japan', 1949),
 (6, 'Wisława Szymborska', 'Poland', 1923),
 (7, 'Jorge Luis Borges', 'Argentina', 1899),
 (8, 'Chimamanda Ngozi Adichie', 'Nigeria', 1977);
INSERT INTO books VALUES
 (1, 'A Wizard of Earthsea', 1, 'fantasy', 1968, 9.99),
 (2, 'The Left Hand of Darkness', 1, 'science fiction', 1969, 11.50),
 (3, 'The Dispossessed', 1, 'science fiction', 1974, 12.00),
 (4, 'Things Fall Apart', 2, 'literary fiction', 1958, 8.75),
 (5, 'Arrow of God', 2, 'literary fiction', 1964, 10.25),
 (6, 'Invisible Cities', 3, 'literary fiction', 1972, 10.99),
 (7, 'If on a winter''s night a traveler', 3, 'literary fiction', 1979, 13.40),
 (8, 'Beloved', 4, 'literary fiction', 1987, 12.60),
 (9, 'Song of Solomon', 4, 'literary fiction', 1977, 11.20),
 (10, 'Kafka on the Shore', 5, 'magical realism', 2002, 14.30),
 (11, 'Norwegian Wood', 5, 'literary fiction', 1987, 12.80),
 (12, 'View with a Grain of Sand', 6, 'poetry', 1995, 15.00),
 (13, 'Ficciones', 7, 'short stories', 1944, 10.50),
 (14, 'The Aleph', 7, 'short stories', 1949, 9.80),
 (15, 'Half of a Yellow Sun', 8, 'literary fiction', 2006, 13.99),
 (16, 'Americanah', 8, 'literary fiction', 2013, 14.99);
INSERT INTO customers VALUES
 (1, 'Amara Okafor', 'Lagos', '2021-03-14'),
 (2, 'Jonas Berg', 'Oslo', '2021-07-02'),
 (3, 'Mei Tanaka', 'Osaka', '2022-01-20'),
 (4, 'Lucas Moreau', 'Lyon', '2022-05-11'),
 (5, 'Sofia Rossi', 'Turin', '2022-09-30'),
 (6, 'Daniel Price', 'Leeds', '2023-02-08'),
 (7, 'Ana Kowalska', 'Kraków', '2023-06-17'),
 (8, 'Mateo García', 'Buenos Aires', '2024-01-05');
INSERT INTO orders VALUES
 (1, 1, '2023-01-10', 'shipped'),
 (2, 2, '2023-02-03', 'shipped'),
 (3, 1, '2023-03-22', 'shipped'),
 (4, 3, '2023-04-15', 'shipped'),
 (5, 4, '2023-05-09', 'cancelled'),
 (6, 5, '2023-06-01', 'shipped'),
 (7, 6, '2023-07-19', 'shipped'),
 (8, 7, '2023-08-25', 'shipped'),
 (9, 2, '2023-10-02', 'shipped'),
 (10, 8, '2024-01-12', 'shipped'),
 (11, 3, '2024-02-29', 'shipped'),
 (12, 5, '2024-03-18', 'pending'),
 (13, 1, '2024-04-04', 'pending'),
 (14, 6, '2024-05-21', 'shipped');
INSERT INTO order_items VALUES
 (1, 4, 1, 8.75), (1, 15, 1, 13.99),
 (2, 1, 2, 9.99), (2, 2, 1, 11.50),
 (3, 16, 1, 14.99),
 (4, 10, 1, 14.30), (4, 11, 1, 12.80), (4, 6, 1, 10.99),
 (5, 8, 1, 12.60),
 (6, 7, 2, 13.40), (6, 6, 1, 10.99),
 (7, 13, 1, 10.50), (7, 14, 1, 9.80), (7, 3, 1, 12.00),
 (8, 12, 3, 15.00),
 (9, 2, 1, 11.50), (9, 3, 1, 12.00),
 (10, 13, 1, 10.50), (10, 9, 1, 11.20),
 (11, 10, 2, 14.30),
 (12, 5, 1, 10.25),
 (13, 4, 1, 8.75), (13, 5, 1, 10.25),
 (14, 8, 1, 12.60), (14, 1, 1, 9.99);
"""


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/sqale-mcp, else ~/.cache/sqale-mcp."""
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sqale-mcp"


def ensure_demo_database(cache_dir: Path) -> Path:
    """Path of the demo database in `cache_dir`, building it first if it is not there yet."""
    target = cache_dir / f"{DEMO_ALIAS}-v{DEMO_VERSION}.sqlite"
    if not target.is_file():
        create_database(target, DEMO_SQL)
    return target
