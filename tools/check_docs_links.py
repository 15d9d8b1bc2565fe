"""Checks every internal link of the built documentation site (out/site by default): each
`href` / `src` that is not an external URL must name a file of the site, and each `#anchor`
an `id` in the page it points to. `mkdocs build --strict` checks the Markdown links; this
checks the HTML a reader clicks, including the theme's, the generated reference pages' and
mkdocstrings' links.

    .venv/bin/python tools/check_docs_links.py [SITE_DIR]

Exit status 0 when every link resolves, 1 with one line per broken link otherwise.
"""

from __future__ import annotations

import html.parser
import pathlib
import sys
import urllib.parse

EXTERNAL = ('http:', 'https:', 'mailto:', 'data:', 'javascript:', 'tel:')


class _Page(html.parser.HTMLParser):
  def __init__(self):
    super().__init__(convert_charrefs=True)
    self.links: list[tuple[str, str]] = []
    self.ids: set[str] = set()

  def handle_starttag(self, tag, attrs):
    a = dict(attrs)
    for key in ('id', 'name'):
      if a.get(key) and (key == 'id' or tag == 'a'):
        self.ids.add(a[key])
    for key in ('href', 'src'):
      if a.get(key) is not None and not (tag == 'link' and a.get('rel') in ('canonical',)):
        self.links.append((tag, a[key]))


def _parse(path: pathlib.Path) -> _Page:
  p = _Page()
  p.feed(path.read_text(encoding='utf-8', errors='replace'))
  return p


def check(site: pathlib.Path) -> list[str]:
  """One line per broken internal link of the HTML pages under `site`."""
  pages = {p: _parse(p) for p in sorted(site.rglob('*.html'))}
  problems = []
  for page, parsed in pages.items():
    if page.name == '404.html' and page.parent == site:
      continue   # served at any depth, so its links are absolute to the server root
    for tag, link in parsed.links:
      if not link or link.startswith(EXTERNAL) or link.startswith('//'):
        continue
      url = urllib.parse.urlsplit(link)
      if url.path:
        target = (page.parent / urllib.parse.unquote(url.path)).resolve()
        if target.is_dir():
          target = target / 'index.html'
      else:
        target = page.resolve()
      rel = page.relative_to(site)
      if not target.exists():
        problems.append(f'{rel}: <{tag}> {link}: no such file in the site')
        continue
      if url.fragment and target.suffix == '.html':
        ids = pages[target].ids if target in pages else _parse(target).ids
        if urllib.parse.unquote(url.fragment) not in ids:
          problems.append(f'{rel}: <{tag}> {link}: no id {url.fragment!r} in '
                          f'{target.relative_to(site.resolve())}')
  return problems


def main(argv=None) -> int:
  args = sys.argv[1:] if argv is None else argv
  site = pathlib.Path(args[0] if args else 'out/site').resolve()
  if not (site / 'index.html').is_file():
    print(f'{site}: no built site (run make docs)', file=sys.stderr)
    return 1
  problems = check(site)
  for line in problems:
    print(line)
  n = sum(1 for _ in site.rglob('*.html'))
  print(f'{n} pages, {len(problems)} broken internal links')
  return 1 if problems else 0


if __name__ == '__main__':
  sys.exit(main())
