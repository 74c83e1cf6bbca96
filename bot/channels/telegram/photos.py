"""Photos, shown to the model when `llm.vision` is on.

Decision: vision is opt-in (`llm.vision`, off by default): many self-hosted
OpenAI-compatible servers and models reject image parts (gpt-4o-mini on OpenAI takes
them). Off, a photo is a media attachment like any other (`bot.channels.telegram.attachments`).

On, Telegram's largest size of the photo that fits `MAX_PHOTO_BYTES` is downloaded
(a photo with no such size is refused before the download; one line, nothing stored,
as when the download fails). The turn's text, and all that is stored, is "[photo]"
then the caption; the image goes to the model with that message in its turn only
(`bot.model.images`): the bot sees a photo in the turn it arrives and later remembers what
was said about it. A turn resumed after a crash is answered from the text alone.
"""

from __future__ import annotations

from telegram import Bot, Message, PhotoSize

from bot.channels.telegram.attachments import download
from bot.model.images import Image

MAX_PHOTO_BYTES = 10 * 1024 * 1024  # Telegram's own limit for photos sent by bots
# Photo turns at once per process (the rest wait their turn): each holds its photo, its
# base64 and the request body (up to ~4x MAX_PHOTO_BYTES) until the model has answered.
PHOTOS_AT_ONCE = 8
MIME = "image/jpeg"  # Telegram re-encodes every photo as JPEG

TOO_BIG = "That photo is too big for me: I look at photos of up to 10 MB."


def photo_size(message: Message) -> PhotoSize | None:
    """The size of the message's photo to download: the largest that fits (or, with none
    fitting, the largest, which `download` refuses); None without a photo."""
    sizes = message.photo
    if not sizes:
        return None
    fitting = [p for p in sizes if p.file_size is None or p.file_size <= MAX_PHOTO_BYTES]
    return max(fitting or sizes, key=lambda p: (p.width * p.height, p.file_size or 0))


async def fetched(bot: Bot, size: PhotoSize) -> Image:
    """The photo's bytes, for the model. Raises Unreadable."""
    return Image(await download(bot, size, MAX_PHOTO_BYTES, TOO_BIG), MIME)


def photo_text(caption: str) -> str:
    """The turn's text, as stored: the marker, then the caption."""
    return f"[photo]\n{caption}" if caption else "[photo]"
