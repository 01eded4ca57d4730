"""A tiny hand-written MovieLens directory, and a plain-Python featurization of it (the oracle)."""
import datetime
import math

MOVIES = [(1, "Toy Story (1995)", "Adventure|Animation|Children"),
          (2, '"American President, The (1995)"', "Comedy|Drama|Romance"),
          (3, "Heat (1995)", "(no genres listed)")]
# user, movie, rating, timestamp: ties in time (user 1 at 1000), a movie not in movies.csv (9),
# users with 1, 5 and 10 ratings, rows out of order.
RATINGS = [(1, 1, 4.0, 1000), (1, 2, 3.5, 1000), (1, 3, 5.0, 900), (1, 9, 2.0, 86400 * 3 + 7200), (1, 4, 4.5, 5000),
           (2, 1, 1.0, 10), (3, 1, 4.0, 100), (3, 2, 4.0, 200), (3, 3, 3.0, 300), (3, 4, 2.0, 400),
           (3, 5, 5.0, 500), (3, 6, 4.0, 600), (3, 7, 4.0, 700), (3, 8, 1.0, 800), (3, 9, 5.0, 900),
           (3, 10, 4.0, 1000)]


def write(directory, ratings=RATINGS, movies=MOVIES, extra_rating_lines=()):
    lines = ["userId,movieId,rating,timestamp"] + [f"{u},{m},{r},{t}" for u, m, r, t in ratings]
    (directory / "ratings.csv").write_text("\n".join(lines + list(extra_rating_lines)) + "\n")
    (directory / "movies.csv").write_text("\n".join(["movieId,title,genres"] +
                                                    [f"{m},{t},{g}" for m, t, g in movies]) + "\n")
    return str(directory)


def expected(ratings=RATINGS, movies=MOVIES, eval_fraction=0.2):
    """{(user, movie): (split, label, ids [5], genre strings, earlier count)} computed row by row."""
    genres = {m: g.split("|") for m, _, g in movies}
    out = {}
    for user in sorted({r[0] for r in ratings}):
        mine = sorted([r for r in ratings if r[0] == user], key=lambda r: r[3])
        n_eval = math.floor(len(mine) * eval_fraction)
        for i, (u, m, rating, ts) in enumerate(mine):
            earlier = sum(1 for r in mine if r[3] < ts)
            when = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)
            ids = [u, m, when.hour, when.weekday(), (1 + earlier).bit_length() - 1]
            split = "eval" if i >= len(mine) - n_eval else "train"
            out[(u, m)] = (split, float(rating >= 4), ids, genres.get(m, []), earlier)
    return out


def without_test_share(ratings, eval_fraction=0.2):
    """The ratings but each user's last floor(eval_fraction * count) by time (ties: file order)."""
    out = []
    for user in sorted({r[0] for r in ratings}):
        mine = sorted([r for r in ratings if r[0] == user], key=lambda r: r[3])
        out += mine[:len(mine) - math.floor(len(mine) * eval_fraction)]
    return out


def larger(users=40, movies=30):
    """(ratings, movies) with some signal: about 750 ratings, the rating a function of user and movie."""
    rows = [(u, m, float(1 + (u * m) % 5), 1000 * m + u) for u in range(1, users) for m in range(1, movies)
            if (u + m) % 3]
    titles = [(m, f"Movie {m}", "|".join(g for g, k in (("Comedy", 2), ("Drama", 3), ("Action", 5)) if m % k == 0)
               or "(no genres listed)") for m in range(1, movies)]
    return rows, titles


def write_larger(directory):
    return write(directory, *larger())


def write_criteo(directory, train_name, train_rows, eval_name, eval_rows):
    """Criteo text files of the synthetic generator (training batches from 0, eval from 2^40)."""
    from tfps.data.synthetic import SyntheticConfig, SyntheticCriteo, write_criteo_text
    gen = SyntheticCriteo(SyntheticConfig())
    write_criteo_text(gen, str(directory / train_name), train_rows)
    write_criteo_text(gen, str(directory / eval_name), eval_rows, first_batch=1 << 40)


def planted(users=150, movies=120, per_user=40, seed=0):
    """(ratings, movies) with a learnable taste: user u likes genre u % 6, and rates a movie 5
    when it has that genre, 2 otherwise (10% of ratings flipped); a few ratings of a user tie in
    time, some across the windows of 8 and the 80/20 split. About users * per_user ratings."""
    import numpy as np
    rng = np.random.default_rng(seed)
    names = ["Action", "Comedy", "Drama", "Horror", "Romance", "Sci-Fi"]
    genres = {m: sorted({m % 6, (m * 7 + 3) % 6}) for m in range(1, movies + 1)}
    titles = [(m, f"Movie {m}", "|".join(names[g] for g in genres[m])) for m in range(1, movies + 1)]
    rows = []
    for u in range(1, users + 1):
        for k, m in enumerate(rng.choice(np.arange(1, movies + 1), per_user, replace=False).tolist()):
            liked = (u % 6) in genres[m]
            if rng.random() < 0.1:
                liked = not liked
            # ties in time: k = 5/6, and k = 7/8, 15/16, ... across each window start of 8 and
            # (with 40 ratings a user) across the train/eval split at 32
            tie = k - 1 if (k % 7 == 6 or (k % 8 == 0 and k)) else k
            rows.append((u, m, 5.0 if liked else 2.0, 100_000 + 1000 * tie + u))
    return rows, titles


def write_planted(directory, **kwargs):
    return write(directory, *planted(**kwargs))
