"""Apple Podcasts' categories, which podcast directories take a show's `itunes:category` from.

A show names one as `Category` or `Category/Subcategory` ("Technology", "Arts/Books"); anything else is refused, as
a directory would refuse the feed. The list is Apple's since 2019 (its "Podcasts categories" page).
"""

from __future__ import annotations

PODCAST_CATEGORIES: dict[str, tuple[str, ...]] = {
    "Arts": ("Books", "Design", "Fashion & Beauty", "Food", "Performing Arts", "Visual Arts"),
    "Business": ("Careers", "Entrepreneurship", "Investing", "Management", "Marketing", "Non-Profit"),
    "Comedy": ("Comedy Interviews", "Improv", "Stand-Up"),
    "Education": ("Courses", "How To", "Language Learning", "Self-Improvement"),
    "Fiction": ("Comedy Fiction", "Drama", "Science Fiction"),
    "Government": (),
    "History": (),
    "Health & Fitness": ("Alternative Health", "Fitness", "Medicine", "Mental Health", "Nutrition", "Sexuality"),
    "Kids & Family": ("Education for Kids", "Parenting", "Pets & Animals", "Stories for Kids"),
    "Leisure": (
        "Animation & Manga", "Automotive", "Aviation", "Crafts", "Games", "Hobbies", "Home & Garden", "Video Games",
    ),
    "Music": ("Music Commentary", "Music History", "Music Interviews"),
    "News": (
        "Business News", "Daily News", "Entertainment News", "News Commentary", "Politics", "Sports News", "Tech News",
    ),
    "Religion & Spirituality": ("Buddhism", "Christianity", "Hinduism", "Islam", "Judaism", "Religion", "Spirituality"),
    "Science": (
        "Astronomy", "Chemistry", "Earth Sciences", "Life Sciences", "Mathematics", "Natural Sciences", "Nature",
        "Physics", "Social Sciences",
    ),
    "Society & Culture": ("Documentary", "Personal Journals", "Philosophy", "Places & Travel", "Relationships"),
    "Sports": (
        "Baseball", "Basketball", "Cricket", "Fantasy Sports", "Football", "Golf", "Hockey", "Rugby", "Running",
        "Soccer", "Swimming", "Tennis", "Volleyball", "Wilderness", "Wrestling",
    ),
    "Technology": (),
    "True Crime": (),
    "TV & Film": ("After Shows", "Film History", "Film Interviews", "Film Reviews", "TV Reviews"),
}  # fmt: skip

CATEGORY_SEPARATOR = "/"


def category_names() -> list[str]:
    """Every category a show may name: each top-level one, then each `Category/Subcategory`."""
    return [
        name
        for category, subcategories in PODCAST_CATEGORIES.items()
        for name in (category, *(f"{category}{CATEGORY_SEPARATOR}{sub}" for sub in subcategories))
    ]


def split_category(name: str) -> tuple[str, str | None]:
    """("Arts", "Books") for "Arts/Books", ("Technology", None) for "Technology"; ValueError for one not listed."""
    category, _, subcategory = name.partition(CATEGORY_SEPARATOR)
    if category not in PODCAST_CATEGORIES or (subcategory and subcategory not in PODCAST_CATEGORIES[category]):
        raise ValueError(
            f"{name!r} is not an Apple Podcasts category; name one as 'Category' or 'Category/Subcategory', such as "
            "'Technology' or 'Arts/Books' (GET /v1/shows/categories lists them)"
        )
    return category, subcategory or None
