"""One module per registered output (reporting.registry): `build(job)` returns a figure or a `render.Table`.

What the article (reporting.article) shows of it is declared here too: `describe(context)`, its paragraph, written
from the numbers (a `prose.Context`: the article's inputs, the speed-up verdict, the datasheet peaks); for a table,
`ARTICLE_COLUMNS` (the columns the article shows, with their headers; every column but the row tags without it),
`ARTICLE_PERCENT_COLUMNS` (fractions shown as percentages), `ARTICLE_SHOWN_ONCE` (columns shown only on the first of
the rows that share the first one's value) and `ARTICLE_FORMAT_BY` (columns, such as a unit, whose values split the
numbers' formats beyond each hardware label's: reporting.article.typesetting.ColumnFormat); and
`shown_as_table(inputs)`, False where the paragraph alone says it all.
Each is optional.
"""
