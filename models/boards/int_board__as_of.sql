{{ config(materialized='table', order_by='board') }}

{#- One row per other board: the as_of a build of it ranks at (var `board_as_of`, default
    now), aligned as each board needs. The publisher reads it back, so the alignment rule is
    applied here only. -#}

select 'listeners' as board, {{ board_as_of(1) }} as as_of
union all
select 'sale' as board, {{ board_as_of(1) }} as as_of
union all
select 'popular' as board, {{ board_as_of(60) }} as as_of
