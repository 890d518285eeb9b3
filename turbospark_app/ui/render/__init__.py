"""How a reply is drawn: Markdown, code colours, math, reasoning/tool parts, HTML export."""
